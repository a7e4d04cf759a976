"""Issue 4: SHAP values of oblivious ensembles against brute force, CatBoost and shap.

Oracles: a brute-force Shapley enumeration in NumPy written from each method's definition on
tiny random ensembles (repeated features, zero-weight leaves, mixed depths); CatBoost
``ShapValues`` (Regular, Exact, Approximate, reference_data) and ``ShapInteractionValues``; shap's
``TreeExplainer`` (tree_path_dependent on the CatBoost model, interventional on an equivalent
tree dictionary). Tolerances: jaximp builds float32 tables and sums them over <= 30 trees where
the oracles use float64, so results agree to about 30 * 6e-8 of the output magnitude:
``rtol=1e-5`` and ``atol=1e-5 * magnitude``.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import catboost
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import shap
from conftest import KINDS, make_data, random_ensemble, summed, train

import jaximp
from jaximp import Explainer, expected_value, shap_interaction_values, shap_values

METHODS = ("path_dependent", "exact", "approximate", "interventional")
slow = pytest.mark.slow  # kinds of output whose numbers the default run already checks on another model
CALC_TYPE = {"path_dependent": "Regular", "exact": "Exact", "approximate": "Approximate"}


def assert_close(got, expected):
    expected = np.asarray(expected, np.float64)
    magnitude = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(np.asarray(got, np.float64), expected, rtol=1e-5, atol=1e-5 * magnitude)


# Brute force, from the definitions ---------------------------------------------------------


def brute_force(ens, x, method, background=None):
    """``(phi [N, F, K], expected [K])`` by enumerating every coalition of every tree's features."""
    phi = np.zeros((len(x), ens.n_features, ens.n_outputs))
    expected = np.zeros(ens.n_outputs)
    for t in range(ens.n_trees):
        d = int(np.asarray(ens.split_mask[t]).sum())
        feats = np.asarray(ens.split_features[t, :d])
        borders = np.asarray(ens.split_borders[t, :d])
        values = np.asarray(ens.leaf_values[t, : 1 << d], np.float64)
        weights = np.asarray(ens.leaf_weights[t, : 1 << d], np.float64)
        if weights.sum() == 0:  # a tree without weight: its leaves count equally
            weights = np.ones_like(weights)

        def bits(row):
            return [int(row[feats[k]] > borders[k]) for k in range(d)]

        def leaf(b):
            return sum(bit << k for k, bit in enumerate(b))

        def node(fixed):  # leaves under a node: fixed = {depth: bit}
            return [leaf_ for leaf_ in range(1 << d) if all((leaf_ >> k) & 1 == b for k, b in fixed.items())]

        def path_value(row_bits, S, level=0, fixed=None):
            # Lundberg's recursion from the root (the last depth); zero-cover nodes: plain mean.
            fixed = fixed or {}
            if level == d:
                return values[leaf([fixed[k] for k in range(d)])]
            k = d - 1 - level
            if feats[k] in S:
                return path_value(row_bits, S, level + 1, {**fixed, k: row_bits[k]})
            children = [{**fixed, k: b} for b in (0, 1)]
            covers = np.array([weights[node(c)].sum() for c in children])
            share = covers / covers.sum() if covers.sum() > 0 else np.array([0.5, 0.5])
            return sum(s * path_value(row_bits, S, level + 1, c) for s, c in zip(share, children))

        def value(row, S):
            row_bits = bits(row)
            if method == "path_dependent":
                return path_value(row_bits, S)
            if method == "exact":  # free bits from a leaf drawn by training weight
                hybrid = [values[leaf([row_bits[k] if feats[k] in S else (b >> k) & 1 for k in range(d)])]
                          for b in range(1 << d)]
                return np.tensordot(weights, np.array(hybrid), 1) / weights.sum()
            rows = np.where(np.isin(np.arange(ens.n_features), list(S)), row, background)
            return np.mean([values[leaf(bits(r))] for r in rows], axis=0)

        def node_mean(fixed):  # cover-weighted mean; zero cover: plain mean
            under = node(fixed)
            w = weights[under]
            return w @ values[under] / w.sum() if w.sum() > 0 else values[under].mean(0)

        players = sorted(set(feats.tolist()))
        n = len(players)
        for i, row in enumerate(x):
            if method == "approximate":  # Saabas: change of the weighted node mean at each split
                row_bits, fixed, before = bits(row), {}, node_mean({})
                for k in range(d - 1, -1, -1):
                    fixed = {**fixed, k: row_bits[k]}
                    after = node_mean(fixed)
                    phi[i, feats[k]] += after - before
                    before = after
                continue
            for p in players:
                others = [q for q in players if q != p]
                for r in range(n):
                    w = math.factorial(r) * math.factorial(n - r - 1) / math.factorial(n)
                    for S in itertools.combinations(others, r):
                        phi[i, p] += w * (value(row, set(S) | {p}) - value(row, set(S)))
        if method == "interventional":
            expected += np.mean([values[leaf(bits(r))] for r in background], axis=0)
        else:
            expected += weights @ values / weights.sum()
    return phi * float(ens.scale), expected * float(ens.scale) + np.asarray(ens.bias)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("seed, depths, n_outputs",
                         [(0, (1, 1, 1), 1), (1, (2, 3), 2), (2, (4, 2, 1, 3), 1), (3, (3,), 1)])
def test_brute_force(method, seed, depths, n_outputs):
    ens = random_ensemble(seed, depths, n_outputs=n_outputs, scale=0.7)
    rng = np.random.default_rng(seed + 10)
    x = rng.normal(size=(12, ens.n_features)).astype(np.float32)
    background = rng.normal(size=(9, ens.n_features)).astype(np.float32) if method == "interventional" else None
    phi, expected = brute_force(ens, x, method, background)
    got = shap_values(ens, x, method=method, background=background)
    base = expected_value(ens, method=method, background=background)
    assert got.shape == ((12, 4) if n_outputs == 1 else (12, 4, n_outputs)) and got.dtype == np.float32
    assert_close(got.reshape(phi.shape), phi)
    assert_close(np.reshape(base, -1), expected)
    # Additivity holds at every row, zero-weight leaves included.
    prediction = ens.predict(x).reshape(12, n_outputs)
    assert_close(got.reshape(phi.shape).sum(1) + np.reshape(base, -1), prediction)


def test_repeated_feature_is_one_player():
    # One tree splitting on feature 0 at both depths: feature 0 takes the whole deviation.
    ens = random_ensemble(5, (2,))
    ens = dataclasses.replace(ens, split_features=jnp.zeros((1, 2), jnp.int32))
    x = np.random.default_rng(0).normal(size=(20, 4)).astype(np.float32)
    for method in ("path_dependent", "exact", "approximate"):
        phi = shap_values(ens, x, method=method)
        np.testing.assert_array_equal(phi[:, 1:], 0.0)
        assert_close(phi[:, 0] + expected_value(ens, method=method), ens.predict(x))


# CatBoost and shap on trained models -------------------------------------------------------


def catboost_shap(model, X, **kw):
    """CatBoost ShapValues as ``(values [N, F, K], expected [K])``."""
    out = np.asarray(model.get_feature_importance(data=catboost.Pool(X, label=kw.pop("label", None)),
                                                  type="ShapValues", **kw))
    out = out[:, None, :] if out.ndim == 2 else out  # [N, K, F + 1]
    return np.moveaxis(out[:, :, :-1], 1, 2), out[0, :, -1]


def explained_rows(kind, n_features=6):
    """Rows like the training data, and wide rows that reach leaves no training row reached."""
    X, _ = make_data(kind, n=60, seed=42, n_features=n_features)
    wide = np.random.default_rng(3).normal(scale=3.0, size=(20, n_features)).astype(np.float32)
    return np.concatenate([X, wide])


GRID = [("regression", 1), ("regression", 6), ("binary", 3), pytest.param("multiclass", 4, marks=slow),
        ("multiregression", 2), pytest.param("binary", 7, marks=slow), ("multiclass", 8)]


@pytest.mark.parametrize("kind, depth", GRID)
def test_against_catboost(kind, depth):
    model, _, _, _ = train(kind, depth=depth, iterations=10 if depth < 7 else 4)
    ens = jaximp.from_catboost(model)
    X = explained_rows(kind)
    prediction = np.asarray(model.predict(X, prediction_type="RawFormulaVal")).reshape(len(X), -1)
    for method, calc_type in CALC_TYPE.items():
        values, expected = catboost_shap(model, X, shap_calc_type=calc_type)
        got = shap_values(ens, X, method=method)
        assert_close(got.reshape(values.shape), values)
        assert_close(np.reshape(expected_value(ens, method=method), -1), expected)
        assert_close(got.reshape(values.shape).sum(1) + expected, prediction)


@pytest.mark.parametrize("kind", [k if k in ("regression", "multiclass") else pytest.param(k, marks=slow)
                                  for k in KINDS])
def test_interventional_against_catboost_reference_data(kind):
    model, X_train, y, _ = train(kind, depth=5, iterations=8)
    ens = jaximp.from_catboost(model)
    X, background = explained_rows(kind)[:30], X_train[:40]
    values, expected = catboost_shap(model, X, label=y[:30], reference_data=catboost.Pool(background, label=y[:40]))
    got = shap_values(ens, X, method="interventional", background=background)
    assert_close(got.reshape(values.shape), values)
    assert_close(np.reshape(expected_value(ens, method="interventional", background=background), -1), expected)


def shap_tree_dict(ens):
    """shap's dictionary tree format for an ObliviousEnsemble: a full binary tree per oblivious
    tree, root = the last depth (CatBoost's order), ``x <= border`` going left."""
    trees = []
    for t in range(ens.n_trees):
        d = int(np.asarray(ens.split_mask[t]).sum())
        values = np.asarray(ens.leaf_values[t, : 1 << d], np.float64) * float(ens.scale)
        weights = np.asarray(ens.leaf_weights[t, : 1 << d], np.float64)
        n = (2 << d) - 1
        left, right, feats = np.full(n, -1), np.full(n, -1), np.full(n, -2)
        thresholds, node_values, covers = np.full(n, -2.0), np.zeros((n, ens.n_outputs)), np.zeros(n)
        for i in range(n):
            level = (i + 1).bit_length() - 1
            lo, hi = (i - (1 << level) + 1) << (d - level), (i - (1 << level) + 2) << (d - level)
            covers[i] = weights[lo:hi].sum()
            node_values[i] = values[lo:hi].mean(0)
            if level < d:
                left[i], right[i] = 2 * i + 1, 2 * i + 2
                feats[i] = int(ens.split_features[t, d - 1 - level])
                thresholds[i] = float(ens.split_borders[t, d - 1 - level])
        trees.append(dict(children_left=left, children_right=right, children_default=left.copy(),
                          features=feats, thresholds=thresholds, values=node_values, node_sample_weight=covers))
    return {"trees": trees, "base_offset": np.asarray(ens.bias, np.float64)}


@pytest.mark.parametrize("kind", [pytest.param("regression", marks=slow), "multiclass"])
def test_against_shap(kind):
    model, X_train, _, _ = train(kind, depth=6, iterations=8)
    ens = jaximp.from_catboost(model)
    X, background = explained_rows(kind)[:40], X_train[:50]
    explainer = shap.TreeExplainer(shap_tree_dict(ens), data=background, feature_perturbation="interventional")
    expected = np.asarray(explainer.shap_values(X))
    got = shap_values(ens, X, method="interventional", background=background)
    assert_close(got, expected.reshape(got.shape))
    assert_close(expected_value(ens, method="interventional", background=background), explainer.expected_value)
    explainer = shap.TreeExplainer(model)  # tree_path_dependent
    expected = np.asarray(explainer.shap_values(X))
    got = shap_values(ens, X)
    assert_close(got, expected.reshape(got.shape))
    assert_close(expected_value(ens), np.reshape(explainer.expected_value, -1).squeeze())


@pytest.mark.parametrize("kind", [pytest.param("regression", marks=slow), pytest.param("multiregression", marks=slow),
                                  "multiclass"])
def test_summed_models_of_mixed_depth(kind):
    model, X_train, y = summed(kind, depths=(2, 5, 3))
    ens = jaximp.from_catboost(model)
    X = explained_rows(kind)
    for method, calc_type in CALC_TYPE.items():
        values, expected = catboost_shap(model, X, shap_calc_type=calc_type)
        assert_close(shap_values(ens, X, method=method).reshape(values.shape), values)
        assert_close(np.reshape(expected_value(ens, method=method), -1), expected)
    background = X_train[:30]
    reference = catboost.Pool(background, label=y[:30])
    values, expected = catboost_shap(model, X[:20], label=y[:20], reference_data=reference)
    got = shap_values(ens, X[:20], method="interventional", background=background)
    assert_close(got.reshape(values.shape), values)


def test_sample_weights_and_scale():
    model, X, _, _ = train("regression", depth=4, weighted=True)
    ens = jaximp.from_catboost(model)
    values, expected = catboost_shap(model, X[:50])
    assert_close(shap_values(ens, X[:50]), values[..., 0])
    # CatBoost refuses a non-identity scale; the values scale linearly and the bias adds.
    scaled = dataclasses.replace(ens, scale=jnp.asarray(0.5, jnp.float32), bias=ens.bias + 2.0)
    for method in ("path_dependent", "approximate"):
        assert_close(shap_values(scaled, X[:50], method=method), 0.5 * shap_values(ens, X[:50], method=method))
        base = expected_value(ens, method=method)
        assert_close(expected_value(scaled, method=method), 0.5 * (base - ens.bias[0]) + ens.bias[0] + 2.0)
        total = shap_values(scaled, X[:50], method=method).sum(1) + expected_value(scaled, method=method)
        assert_close(total, scaled.predict(X[:50]))


@pytest.mark.parametrize("kind, depth", [("regression", 3), pytest.param("binary", 6, marks=slow), ("multiclass", 4),
                                         pytest.param("multiregression", 2, marks=slow)])
def test_interaction_values_against_catboost(kind, depth):
    model, _, _, _ = train(kind, depth=depth, iterations=6)
    ens = jaximp.from_catboost(model)
    X = explained_rows(kind)[:30]
    expected = np.asarray(model.get_feature_importance(data=catboost.Pool(X), type="ShapInteractionValues"))
    expected = expected[:, :-1, :-1] if expected.ndim == 3 else np.moveaxis(expected[:, :, :-1, :-1], 1, -1)
    got = shap_interaction_values(ens, X)
    assert got.shape == expected.shape and got.dtype == np.float32
    assert_close(got, expected)
    np.testing.assert_array_equal(got, np.swapaxes(got, 1, 2))
    assert_close(got.sum(2), shap_values(ens, X))
    if kind == "regression":
        assert_close(got, shap.TreeExplainer(model).shap_interaction_values(X))


# Contracts ----------------------------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
def test_results_do_not_depend_on_batch_size(method):
    model, X, _, _ = train("multiclass", depth=6)
    ens = jaximp.from_catboost(model)
    background = X[:25] if method == "interventional" else None
    expected = shap_values(ens, X, method=method, background=background)
    for batch_size in (1, 7, 300):
        got = shap_values(ens, X, method=method, background=background, batch_size=batch_size)
        np.testing.assert_array_equal(got, expected)


def test_sharding_over_devices():
    model, X, _, _ = train("multiclass", depth=5)
    ens = jaximp.from_catboost(model)
    for method, background in (("path_dependent", None), ("interventional", X[:33])):
        expected = shap_values(ens, X, method=method, background=background)
        np.testing.assert_array_equal(shap_values(ens, X, method=method, background=background, devices=1), expected)
        if len(jax.devices()) >= 2:
            got = shap_values(ens, X, method=method, background=background, devices=2, batch_size=64)
            np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("nan_mode", ["Min", pytest.param("Max", marks=slow)])  # both modes' leaves: test_core.py
def test_nan_rows_and_named_frames(nan_mode):
    import pandas as pd

    model, X_train, y, _ = train("regression", depth=4, nan_mode=nan_mode, nan_fraction=0.2)
    ens = jaximp.from_catboost(model)
    X, _ = make_data("regression", n=40, seed=5, nan_fraction=0.3)
    values, expected = catboost_shap(model, X)
    assert_close(shap_values(ens, X), values[..., 0])
    values, _ = catboost_shap(model, X, label=y[:40], reference_data=catboost.Pool(X_train[:30], label=y[:30]))
    assert_close(shap_values(ens, X, method="interventional", background=X_train[:30]), values[..., 0])
    # DataFrames: a background with shuffled columns of a model with names is matched by name.
    names = [f"f{i}" for i in range(6)]
    named = catboost.CatBoostRegressor(iterations=5, depth=3, verbose=0, thread_count=1, allow_writing_files=False)
    named.fit(pd.DataFrame(X_train, columns=names), y)
    ens = jaximp.from_catboost(named)
    frame = pd.DataFrame(X_train[:30], columns=names)[names[::-1]]
    assert_close(shap_values(ens, pd.DataFrame(X, columns=names), method="interventional", background=frame),
                 shap_values(ens, X, method="interventional", background=X_train[:30]))


def test_background_weighting_and_size():
    # The background enters through leaf histograms: a repeated background gives the same values,
    # and a background of one row explains the difference from that row's prediction.
    model, X, _, _ = train("regression", depth=5)
    ens = jaximp.from_catboost(model)
    once = shap_values(ens, X[:50], method="interventional", background=X[:10])
    assert_close(shap_values(ens, X[:50], method="interventional", background=np.tile(X[:10], (300, 1)),
                             batch_size=256), once)
    one = shap_values(ens, X[:50], method="interventional", background=X[:1])
    assert_close(one.sum(1), ens.predict(X[:50]) - ens.predict(X[:1]))
    assert_close(expected_value(ens, method="interventional", background=X[:1]), ens.predict(X[:1])[0])


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


def test_errors(regression_model):
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
        shap_interaction_values(ens, X[0])
