"""Issue 3: importances from the model alone (PredictionValuesChange, Interaction, split stats).

Oracles: CatBoost's ``get_feature_importance`` on trained models (float64 in CatBoost, float32
here), float64 brute force over leaf pairs and over the explicitly unrolled binary tree, the
seed's published iris example, and closed forms.

Tolerances: importances are normalised to sum 100 and computed from float32 leaf values (relative
rounding 6e-8) summed over at most a few thousand terms, so the error is a few 1e-6 of the total:
rtol=1e-5, atol=1e-4 (= 1e-6 * 100).
"""

from __future__ import annotations

import dataclasses
import json

import catboost
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import make_data, summed, train

import jaximp
from jaximp import interaction, prediction_values_change, split_importance

RTOL, ATOL = 1e-5, 1e-4


# ------------------------------------------------------------------------------------------
# float64 brute force (loops, written from the definitions)


def brute_pvc(ens, weights=None, leaf_values=None):
    """PredictionValuesChange by looping over trees, depths and leaf pairs (seed 000)."""
    sf, mask = np.asarray(ens.split_features), np.asarray(ens.split_mask)
    values = np.asarray(ens.leaf_values if leaf_values is None else leaf_values, np.float64)
    weights = np.asarray(ens.leaf_weights if weights is None else weights, np.float64)
    out = np.zeros(ens.n_features)
    for t in range(ens.n_trees):
        for d in range(int(mask[t].sum())):
            for i in range(ens.n_leaves):
                j = i ^ (1 << d)
                c1, c2 = weights[t, i], weights[t, j]
                if j < i or c1 == 0 or c2 == 0:
                    continue
                avr = (c1 * values[t, i] + c2 * values[t, j]) / (c1 + c2)
                out[sf[t, d]] += np.sum(c1 * (values[t, i] - avr) ** 2 + c2 * (values[t, j] - avr) ** 2)
    return out / out.sum() * 100


def brute_unrolled(ens):
    """XGBoost-style split statistics of the explicitly unrolled binary trees.

    The root tests the highest bit; the node reached by the higher bits ``prefix`` holds the
    leaves ``l`` with ``l >> (d + 1) == prefix``. Returns dicts weight, total_gain, total_cover.
    """
    sf, mask = np.asarray(ens.split_features), np.asarray(ens.split_mask)
    values = float(ens.scale) * np.asarray(ens.leaf_values, np.float64)
    weights = np.asarray(ens.leaf_weights, np.float64)
    stats = {k: np.zeros(ens.n_features) for k in ("weight", "total_gain", "total_cover")}

    def mean(t, leaves):
        c = weights[t, leaves].sum()
        return c, (weights[t, leaves, None] * values[t, leaves]).sum(0) / c if c > 0 else 0.0

    for t in range(ens.n_trees):
        depth = int(mask[t].sum())
        leaf = np.arange(1 << depth)
        for d in range(depth - 1, -1, -1):
            for prefix in range(1 << (depth - 1 - d)):
                node = leaf[(leaf >> (d + 1)) == prefix]
                c, v = mean(t, node)
                gain = 0.0
                for side in (0, 1):
                    cc, vc = mean(t, node[((node >> d) & 1) == side])
                    gain += cc * np.sum((vc - v) ** 2)
                f = sf[t, d]
                stats["weight"][f] += 1
                stats["total_gain"][f] += gain
                stats["total_cover"][f] += c
    return stats


def catboost_interaction(model, n_features):
    """CatBoost's Interaction rows ``[f, g, score]`` as a symmetric matrix."""
    out = np.zeros((n_features, n_features))
    for f, g, score in model.get_feature_importance(type="Interaction"):
        out[int(f), int(g)] = out[int(g), int(f)] = score
    return out


def catboost_pvc(model, data=None):
    return model.get_feature_importance(data, type="PredictionValuesChange")


# ------------------------------------------------------------------------------------------
# PredictionValuesChange


def test_seed_iris_example():
    """The seed's worked example: one depth-2 tree on iris, PVC = [0, 0, 44.4996, 55.5004]."""
    from sklearn.datasets import load_iris

    X, y = load_iris(return_X_y=True)
    model = catboost.CatBoostClassifier(iterations=1, depth=2, random_seed=42, verbose=0, thread_count=1,
                                        allow_writing_files=False)
    model.fit(X, y)
    ens = jaximp.from_catboost(model)
    got = prediction_values_change(ens)
    np.testing.assert_allclose(got, [0.0, 0.0, 44.4996, 55.5004], atol=1e-4)  # published to 4 decimals
    assert got[0] == 0.0 and got[1] == 0.0  # never split on: exactly 0
    np.testing.assert_allclose(prediction_values_change(ens, catboost.Pool(X, y)), got, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize(
    "kind, depth, weighted",
    [("regression", 1, False), ("binary", 3, True), ("multiclass", 5, False),
     ("multiregression", 8, True), ("regression", 6, True)],
)
def test_pvc_against_catboost(kind, depth, weighted):
    model, X, y, _ = train(kind, depth=depth, iterations=12, weighted=weighted)
    ens = jaximp.from_catboost(model)
    got = prediction_values_change(ens)
    assert got.shape == (ens.n_features,) and got.dtype == jnp.float32
    np.testing.assert_allclose(got, catboost_pvc(model), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got, brute_pvc(ens), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(float(got.sum()), 100.0, rtol=1e-6)
    unused = np.setdiff1d(np.arange(ens.n_features), np.asarray(ens.split_features)[np.asarray(ens.split_mask)])
    assert np.all(np.asarray(got)[unused] == 0.0)


@pytest.mark.parametrize("kind", ["regression", "multiclass"])
def test_pvc_with_data_recounts_leaf_weights(kind):
    """With a Pool, CatBoost recounts leaf weights from its rows (with the Pool's weights)."""
    model, X, y, _ = train(kind, depth=5, iterations=15)
    ens = jaximp.from_catboost(model)
    X_new, y_new = make_data(kind, n=300, seed=11)
    w_new = np.random.default_rng(3).uniform(0.1, 2.0, size=len(X_new))
    expected = catboost_pvc(model, catboost.Pool(X_new, y_new))
    assert np.abs(expected - catboost_pvc(model)).max() > 1e-2  # new rows do change the result
    np.testing.assert_allclose(prediction_values_change(ens, X_new), expected, rtol=RTOL, atol=ATOL)
    expected_w = catboost_pvc(model, catboost.Pool(X_new, y_new, weight=w_new))
    np.testing.assert_allclose(prediction_values_change(ens, X_new, sample_weight=w_new), expected_w,
                               rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(prediction_values_change(ens, catboost.Pool(X_new, weight=w_new)), expected_w,
                               rtol=RTOL, atol=ATOL)
    # counting is exact, so batch size and device count change nothing
    np.testing.assert_array_equal(prediction_values_change(ens, X_new, batch_size=7, devices=1),
                                  prediction_values_change(ens, X_new))


def test_pvc_training_rows_give_model_weights():
    """The model's leaf weights are its training rows' weights: X=train data reproduces X=None."""
    model, X, _, w = train("regression", depth=4, iterations=10, weighted=True)
    ens = jaximp.from_catboost(model)
    np.testing.assert_allclose(prediction_values_change(ens, X, sample_weight=w), prediction_values_change(ens),
                               rtol=RTOL, atol=ATOL)


def test_pvc_class_weights_come_from_sample_weight():
    """CatBoost multiplies a labelled Pool's rows by the model's class weights."""
    X, _ = make_data("binary", n=300, seed=2)
    y = (X[:, 0] > 0.8).astype(int)
    model = catboost.CatBoostClassifier(iterations=8, depth=4, auto_class_weights="Balanced", verbose=0,
                                        thread_count=1, random_seed=0, allow_writing_files=False).fit(X, y)
    ens = jaximp.from_catboost(model)
    X_new, _ = make_data("binary", n=200, seed=12)
    y_new = (X_new[:, 0] > 0.8).astype(int)
    class_weights = np.asarray(model.get_all_params()["class_weights"])
    np.testing.assert_allclose(prediction_values_change(ens, X_new, sample_weight=class_weights[y_new]),
                               catboost_pvc(model, catboost.Pool(X_new, y_new)), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(prediction_values_change(ens, X_new), catboost_pvc(model, catboost.Pool(X_new)),
                               rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("kind", ["regression", "multiclass", "multiregression"])
def test_summed_mixed_depths(kind):
    model, X, _ = summed(kind, depths=(2, 5, 3))
    ens = jaximp.from_catboost(model)
    assert not np.asarray(ens.split_mask).all()
    np.testing.assert_allclose(prediction_values_change(ens), catboost_pvc(model), rtol=RTOL, atol=ATOL)
    X_new, y_new = make_data(kind, n=200, seed=13)
    np.testing.assert_allclose(prediction_values_change(ens, X_new), catboost_pvc(model, catboost.Pool(X_new, y_new)),
                               rtol=RTOL, atol=ATOL)
    if kind != "multiclass":
        np.testing.assert_allclose(interaction(ens), catboost_interaction(model, ens.n_features),
                                   rtol=RTOL, atol=ATOL)
    stats = brute_unrolled(ens)
    np.testing.assert_allclose(split_importance(ens, "weight"), stats["weight"])
    np.testing.assert_allclose(split_importance(ens, "total_gain"), stats["total_gain"], rtol=1e-5,
                               atol=1e-6 * stats["total_gain"].sum())


def test_scale_and_bias_are_ignored():
    model, _, _, _ = train("regression", depth=4, iterations=10)
    scaled = model.copy()
    scaled.set_scale_and_bias(2.5, 1.0)
    ens = jaximp.from_catboost(scaled)
    assert float(ens.scale) == 2.5
    np.testing.assert_allclose(prediction_values_change(ens), catboost_pvc(scaled), rtol=RTOL, atol=ATOL)
    unscaled = jaximp.from_catboost(model)
    np.testing.assert_allclose(interaction(ens), interaction(unscaled), rtol=1e-6)
    np.testing.assert_allclose(split_importance(ens, "total_gain"), 6.25 * split_importance(unscaled, "total_gain"),
                               rtol=1e-5)


def test_pvc_gradient_matches_finite_difference():
    """jax.grad of a PVC entry w.r.t. leaf values equals the float64 central difference."""
    model, X, _, _ = train("regression", depth=3, iterations=6)
    ens = jaximp.from_catboost(model)
    f = int(np.argmax(np.asarray(prediction_values_change(ens))))

    def entry(values):
        return prediction_values_change(dataclasses.replace(ens, leaf_values=values))[f]

    grad = np.asarray(jax.grad(entry)(ens.leaf_values), np.float64)
    values = np.asarray(ens.leaf_values, np.float64)
    for seed in range(3):
        u = np.random.default_rng(seed).normal(size=values.shape)
        eps = 1e-5
        up, down = brute_pvc(ens, leaf_values=values + eps * u), brute_pvc(ens, leaf_values=values - eps * u)
        fd = (up[f] - down[f]) / (2 * eps)
        np.testing.assert_allclose(np.sum(grad * u), fd, rtol=1e-3, atol=1e-4 * np.abs(grad).sum())
    # through the data path (map_rows traced), and w.r.t. leaf weights with empty leaves
    via_rows = jax.grad(lambda v: prediction_values_change(dataclasses.replace(ens, leaf_values=v), X)[f])
    np.testing.assert_allclose(via_rows(ens.leaf_values), grad, rtol=1e-4, atol=1e-6 * np.abs(grad).max())
    mixed = jaximp.from_catboost(summed("regression", depths=(2, 5, 3))[0])
    assert (np.asarray(mixed.leaf_weights) == 0).any()
    gw = jax.grad(lambda w: prediction_values_change(dataclasses.replace(mixed, leaf_weights=w))[0])(mixed.leaf_weights)
    assert np.isfinite(np.asarray(gw)).all() and np.abs(np.asarray(gw)).max() > 0


def test_jit_gives_the_same():
    model, _, _, _ = train("multiclass", depth=4, iterations=8)
    ens = jaximp.from_catboost(model)
    np.testing.assert_allclose(jax.jit(prediction_values_change)(ens), prediction_values_change(ens), rtol=1e-6)
    np.testing.assert_allclose(jax.jit(interaction)(ens), interaction(ens), rtol=1e-6)
    np.testing.assert_allclose(jax.jit(split_importance, static_argnames="type")(ens, type="gain"),
                               split_importance(ens, "gain"), rtol=1e-6)


# ------------------------------------------------------------------------------------------
# Interaction


@pytest.mark.parametrize("kind, depth", [("regression", 2), ("binary", 6), ("multiregression", 8)])
def test_interaction_against_catboost(kind, depth):
    model, _, _, _ = train(kind, depth=depth, iterations=12)
    ens = jaximp.from_catboost(model)
    got = np.asarray(interaction(ens))
    assert got.shape == (ens.n_features, ens.n_features) and got.dtype == np.float32
    np.testing.assert_allclose(got, catboost_interaction(model, ens.n_features), rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(got, got.T)
    assert np.all(np.diag(got) == 0.0) and np.all(got >= 0)
    np.testing.assert_allclose(np.triu(got).sum(), 100.0, rtol=1e-5)


def test_interaction_multiclass_catboost_is_cancellation_noise():
    """MultiClass leaf values sum to 0 over classes, so CatBoost's |sum_k delta_k| is rounding.

    CatBoost's numbers are reproduced exactly by the float64 loop on the JSON leaf values, yet
    every |sum_k delta_k| is below 1e-12 of the leaf values' size: hence the "abs" default.
    """
    model, _, _, _ = train("multiclass", depth=4, iterations=10)
    ens = jaximp.from_catboost(model)
    trees = json.loads(_json(model))["oblivious_trees"]
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


def _json(model):
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.json")
        model.save_model(path, format="json")
        with open(path) as f:
            return f.read()


# ------------------------------------------------------------------------------------------
# Split statistics


def test_root_is_the_last_split():
    """CatBoost's plot_tree draws the split of the highest bit at the root (as split_importance reads it)."""
    pytest.importorskip("graphviz")
    model, _, _, _ = train("regression", depth=4, iterations=3)
    ens = jaximp.from_catboost(model)
    for t in range(ens.n_trees):
        source = model.plot_tree(t).source
        root = source.split('0 [label="', 1)[1].split(",", 1)[0]
        assert int(root) == int(ens.split_features[t, 3])


@pytest.mark.parametrize("kind, depth", [("regression", 1), ("multiclass", 4), ("binary", 7)])
def test_split_importance_against_unrolled_tree(kind, depth):
    model, _, _, _ = train(kind, depth=depth, iterations=10, weighted=True)
    ens = jaximp.from_catboost(model)
    stats = brute_unrolled(ens)
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


# ------------------------------------------------------------------------------------------
# Errors


def test_errors(regression_model):
    model, ens, X, _ = regression_model
    with pytest.raises(TypeError, match="prediction_values_change: ens must be a jaximp.ObliviousEnsemble"):
        prediction_values_change(model)
    with pytest.raises(TypeError, match="interaction: ens must be"):
        interaction(np.zeros(3))
    with pytest.raises(ValueError, match="sample_weight must come with X"):
        prediction_values_change(ens, sample_weight=np.ones(3))
    with pytest.raises(ValueError, match=r"sample_weight must have shape \(400,\)"):
        prediction_values_change(ens, X, sample_weight=np.ones(3))
    with pytest.raises(ValueError, match="sample_weight must be finite and non-negative"):
        prediction_values_change(ens, X, sample_weight=-np.ones(len(X)))
    with pytest.raises(ValueError, match="X must have 6 columns"):
        prediction_values_change(ens, X[:, :3])
    with pytest.raises(ValueError, match="output_reduction must be None or one of"):
        interaction(ens, output_reduction="max")
    with pytest.raises(ValueError, match="type must be one of 'weight', 'split', 'gain'"):
        split_importance(ens, "mdi")
    with pytest.raises(ValueError, match="scikit-learn models only"):
        split_importance(ens, "impurity")
    with pytest.raises(TypeError, match="split_importance: ens must be"):
        split_importance(model, "gain")
