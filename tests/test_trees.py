"""Non-symmetric CatBoost trees (Depthwise, Lossguide) as TreeEnsemble.

Oracles: CatBoost on the model reloaded from its own JSON export (the reference: training-time
leaf numbering and SHAP of a freshly trained non-symmetric model differ, catboost issue 2136):
``predict(RawFormulaVal)``, ``calc_leaf_indexes``, ``PredictionValuesChange``, ``ShapValues``
(Regular, Approximate) and ``ShapInteractionValues``; shap's ``TreeExplainer`` (interventional,
on the same trees as a shap tree dictionary); and a brute-force Shapley enumeration over the
JSON trees. Tolerances: jaximp works in float32 over <= 12 trees where the oracles use float64,
so results agree to about 12 * 6e-8 of the output magnitude: ``rtol=1e-5``, ``atol=1e-5 *
magnitude`` (leaf indices exactly).

The default run explains each GRID model once against CatBoost (path-dependent or approximate,
each method on three kinds of output and both grow policies) and each other oracle on fewer
models than ``-m slow`` does (across them, every kind of output, grow policy and kernel); the
trees of CatBoost's depth limit and the batch-size contract run with ``-m slow`` only.
"""

from __future__ import annotations

import functools
import itertools
import json
import math

import catboost
import jax
import numpy as np
import pytest
import shap
from conftest import json_reloaded, make_data

from jaximp import expected_value as tree_expected_value
from jaximp import leaf_indices as tree_leaf_indices
from jaximp import predict as tree_predict
from jaximp import prediction_values_change as tree_prediction_values_change
from jaximp import shap_interaction_values as tree_shap_interaction_values
from jaximp import shap_values as tree_shap_values
from jaximp._importers.catboost_trees import tree_ensemble_from_json

_LOSS = {"regression": "RMSE", "binary": "Logloss", "multiclass": "MultiClass"}
GRID = [  # (kind, grow_policy, depth, max_leaves, nan_mode)
    ("regression", "Depthwise", 6, None, "Min"),
    ("regression", "Lossguide", 10, 64, "Max"),
    ("binary", "Depthwise", 4, None, "Max"),
    ("binary", "Lossguide", 8, 20, "Min"),
    ("multiclass", "Depthwise", 5, None, "Min"),
    ("multiclass", "Lossguide", 6, 16, "Max"),
]
slow = pytest.mark.slow


def assert_close(got, expected, rtol=1e-5):
    expected = np.asarray(expected, np.float64)
    magnitude = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(np.asarray(got, np.float64), expected, rtol=rtol, atol=rtol * magnitude)


@functools.cache
def trained(kind, grow_policy, depth, max_leaves, nan_mode, iterations=12, n_features=6):
    """``(json dict, CatBoost model reloaded from that JSON, X with NaN)``."""
    X, y = make_data(kind, n=600, n_features=n_features, nan_fraction=0.05)
    params = dict(loss_function=_LOSS[kind], depth=depth, iterations=iterations, grow_policy=grow_policy,
                  nan_mode=nan_mode, learning_rate=0.3, random_seed=0, verbose=0, thread_count=1,
                  allow_writing_files=False)
    if max_leaves:
        params["max_leaves"] = max_leaves
    model_json, reloaded = json_reloaded(catboost.CatBoost(params).fit(X, y))
    return model_json, reloaded, X


def rows(X, n=60, seed=3):
    """Rows to explain: training rows plus fresh ones, NaN included."""
    rng = np.random.default_rng(seed)
    fresh = rng.normal(size=(n // 2, X.shape[1])).astype(np.float32)
    fresh[rng.random(fresh.shape) < 0.1] = np.nan
    return np.concatenate([X[: n - n // 2], fresh])


def catboost_shap(model, X, **kw):
    """CatBoost ShapValues as ``(values [N, F, K], expected [K])``."""
    out = model.get_feature_importance(catboost.Pool(X), type="ShapValues", **kw)
    if out.ndim == 2:
        out = out[:, None, :]
    return out[:, :, :-1].transpose(0, 2, 1), out[0, :, -1]


# 1. Structure, leaves and predictions ------------------------------------------------------


@pytest.mark.parametrize("case", GRID)
def test_leaves_and_predictions(case):
    model_json, model, X = trained(*case)
    ens = tree_ensemble_from_json(model_json)
    x = rows(X, 200)
    np.testing.assert_array_equal(tree_leaf_indices(ens, x), model.calc_leaf_indexes(x))
    expected = model.predict(x, prediction_type="RawFormulaVal")
    got = tree_predict(ens, x)
    assert got.shape == expected.shape and got.dtype == np.float32
    assert_close(got, expected)
    assert ens.depth <= case[2] and ens.n_leaves <= (case[3] or 1 << case[2])


def test_summed_models(tmp_path):
    """``catboost.sum_models`` of a Depthwise and a Lossguide model of different depths, weighted:
    trees of different sizes in one ensemble, each model's leaves scaled by its weight."""
    (_, shallow, X), (_, deep, _) = trained(*GRID[0]), trained("regression", "Lossguide", 8, 24, "Min")
    path = str(tmp_path / "sum.json")
    catboost.sum_models([shallow, deep], weights=[0.3, 0.7]).save_model(path, format="json")
    model = catboost.CatBoost()
    model.load_model(path, format="json")
    with open(path) as f:
        ens = tree_ensemble_from_json(json.load(f))
    x = rows(X, 100)
    assert ens.n_trees == shallow.tree_count_ + deep.tree_count_
    np.testing.assert_array_equal(tree_leaf_indices(ens, x), model.calc_leaf_indexes(x))
    assert_close(tree_predict(ens, x), model.predict(x, prediction_type="RawFormulaVal"))
    assert_close(tree_prediction_values_change(ens), model.get_feature_importance(type="PredictionValuesChange"))
    values, expected = catboost_shap(model, x)
    assert_close(tree_shap_values(ens, x), values[:, :, 0])
    assert_close(tree_expected_value(ens), expected[0])


@slow  # by default, TreeEnsemble steps and devices: test_scale.py, test_trees_importance.py
def test_results_do_not_depend_on_batch_size():
    model_json, _, X = trained(*GRID[1])
    ens = tree_ensemble_from_json(model_json)
    x = rows(X, 300)
    whole = tree_predict(ens, x)
    np.testing.assert_array_equal(tree_predict(ens, x, batch_size=64), whole)
    np.testing.assert_array_equal(tree_predict(ens, x, devices=2), whole)
    np.testing.assert_array_equal(tree_leaf_indices(ens, x, batch_size=100), tree_leaf_indices(ens, x))
    np.testing.assert_array_equal(tree_shap_values(ens, x, batch_size=64), tree_shap_values(ens, x))


def test_is_a_pytree():
    model_json, _, X = trained(*GRID[0])
    ens = tree_ensemble_from_json(model_json)
    leaves, treedef = jax.tree_util.tree_flatten(ens)
    assert len(leaves) == 9  # the arrays; sizes and names are static
    again = jax.tree_util.tree_unflatten(treedef, leaves)
    np.testing.assert_array_equal(tree_predict(again, X[:50]), tree_predict(ens, X[:50]))
    grad = jax.grad(lambda v: tree_prediction_values_change(
        ens.__class__(**{**ens.__dict__, "leaf_values": v}))[0])(ens.leaf_values)
    assert grad.shape == ens.leaf_values.shape and np.isfinite(np.asarray(grad)).all()


def test_refuses_bad_models():
    model_json, _, _ = trained(*GRID[0])
    with pytest.raises(ValueError, match="not a CatBoost JSON model"):
        tree_ensemble_from_json({"trees": []})
    with pytest.raises(ValueError, match="no non-symmetric trees"):
        tree_ensemble_from_json({**model_json, "trees": []})
    broken = json.loads(json.dumps(model_json))
    broken["trees"][0]["split"]["split_type"] = "OnlineCtr"
    with pytest.raises(ValueError, match="OnlineCtr"):
        tree_ensemble_from_json(broken)


# 2. PredictionValuesChange ---------------------------------------------------------------


@pytest.mark.parametrize("case", GRID)
def test_prediction_values_change(case):
    model_json, model, _ = trained(*case)
    got = tree_prediction_values_change(tree_ensemble_from_json(model_json))
    expected = model.get_feature_importance(type="PredictionValuesChange")
    assert_close(got, expected)
    assert abs(float(got.sum()) - 100.0) < 1e-3


# 3. SHAP ----------------------------------------------------------------------------------


DEFAULT_METHOD = {0: "approximate", 1: "path_dependent", 2: "path_dependent", 3: "approximate", 4: "approximate",
                  5: "path_dependent"}  # GRID index: the method run by default, the other with -m slow


@pytest.mark.parametrize("case, method, calc_type", [
    pytest.param(case, method, calc_type, id=f"{method}-{calc_type}-case{i}",
                 marks=() if DEFAULT_METHOD[i] == method else slow)
    for method, calc_type in [("path_dependent", "Regular"), ("approximate", "Approximate")]
    for i, case in enumerate(GRID)])
def test_shap_against_catboost(case, method, calc_type):
    model_json, model, X = trained(*case)
    ens = tree_ensemble_from_json(model_json)
    x = rows(X)
    values, expected = catboost_shap(model, x, shap_calc_type=calc_type)
    got = tree_shap_values(ens, x, method=method)
    assert_close(np.reshape(got, values.shape), values)
    assert_close(np.reshape(tree_expected_value(ens, method=method), -1), expected)
    additive = np.reshape(got, values.shape).sum(1) + np.reshape(tree_expected_value(ens, method=method), -1)
    assert_close(additive, model.predict(x, prediction_type="RawFormulaVal").reshape(additive.shape))


def shap_tree_dict(model_json):
    """shap's dictionary format for the JSON trees: ``x <= threshold`` goes left, NaN to the
    side the feature's nan treatment sends it (``children_default``)."""
    nan_right = [f.get("nan_value_treatment") == "AsTrue" for f in model_json["features_info"]["float_features"]]
    scale, bias = model_json["scale_and_bias"]
    trees = []
    for tree in model_json["trees"]:
        nodes = []

        def add(node):
            i = len(nodes)
            nodes.append(None)
            if "value" in node:
                nodes[i] = (-1, -1, -2, -2.0, np.atleast_1d(node["value"]) * scale, node["weight"])
                return i
            left, right = add(node["left"]), add(node["right"])
            split = node["split"]
            nodes[i] = (left, right, split["float_feature_index"], split["border"], None,
                        nodes[left][5] + nodes[right][5])
            return i

        add(tree)
        left, right, feats, thresholds = (np.asarray([node[j] for node in nodes]) for j in range(4))
        covers = np.asarray([node[5] for node in nodes], np.float64)
        values = np.zeros((len(nodes), len(np.atleast_1d(bias))))
        for i, node in enumerate(nodes):
            if node[4] is not None:
                values[i] = node[4]
        default = np.where(np.asarray([nan_right[f] if f >= 0 else False for f in feats]), right, left)
        trees.append(dict(children_left=left, children_right=right, children_default=default,
                          features=feats, thresholds=thresholds.astype(np.float64), values=values,
                          node_sample_weight=covers.astype(np.float64)))
    return {"trees": trees, "base_offset": np.atleast_1d(np.asarray(bias, np.float64))}


@pytest.mark.parametrize("case", [pytest.param(GRID[0], marks=slow), pytest.param(GRID[3], marks=slow), GRID[5]])
def test_interventional_against_shap(case):
    model_json, model, X = trained(*case)
    ens = tree_ensemble_from_json(model_json)
    x, background = rows(X, 40), X[100:150]
    explainer = shap.TreeExplainer(shap_tree_dict(model_json), data=background,
                                   feature_perturbation="interventional")
    expected = np.asarray(explainer.shap_values(x))
    got = tree_shap_values(ens, x, method="interventional", background=background)
    assert_close(np.reshape(got, expected.shape), expected)
    base = tree_expected_value(ens, method="interventional", background=background)
    assert_close(np.reshape(base, -1), np.reshape(explainer.expected_value, -1))


def brute_force(model_json, x, background=None):
    """``[N, F, K]`` Shapley values by enumerating coalitions of each JSON tree's features, with
    Lundberg's path-dependent value function or the interventional one over ``background``."""
    nan_right = [f.get("nan_value_treatment") == "AsTrue" for f in model_json["features_info"]["float_features"]]
    scale, bias = model_json["scale_and_bias"]
    out = np.zeros((len(x), len(nan_right), len(np.atleast_1d(bias))))

    def cover(n):
        return n["weight"] if "value" in n else cover(n["left"]) + cover(n["right"])

    def goes_right(split, row):
        v = row[split["float_feature_index"]]
        return nan_right[split["float_feature_index"]] if np.isnan(v) else np.float32(v) > np.float32(split["border"])

    def path_value(n, row, S):
        if "value" in n:
            return np.atleast_1d(np.asarray(n["value"], np.float64))
        if n["split"]["float_feature_index"] in S:
            return path_value(n["right"] if goes_right(n["split"], row) else n["left"], row, S)
        c = np.array([cover(n["left"]), cover(n["right"])], np.float64)
        share = c / c.sum() if c.sum() > 0 else np.array([0.5, 0.5])
        return share[0] * path_value(n["left"], row, S) + share[1] * path_value(n["right"], row, S)

    def leaf_value(n, row):
        while "value" not in n:
            n = n["right"] if goes_right(n["split"], row) else n["left"]
        return np.atleast_1d(np.asarray(n["value"], np.float64))

    def features(n):
        if "value" in n:
            return set()
        return {n["split"]["float_feature_index"]} | features(n["left"]) | features(n["right"])

    for tree in model_json["trees"]:
        players = sorted(features(tree))
        m = len(players)
        for i, row in enumerate(x):
            def value(S):
                if background is None:
                    return path_value(tree, row, S)
                mixed = np.where(np.isin(np.arange(len(row)), list(S)), row, background)
                return np.mean([leaf_value(tree, b) for b in mixed], axis=0)

            for p in players:
                others = [q for q in players if q != p]
                for r in range(m):
                    w = math.factorial(r) * math.factorial(m - r - 1) / math.factorial(m)
                    for S in itertools.combinations(others, r):
                        out[i, p] += w * (value(set(S) | {p}) - value(set(S)))
    return out * scale


def check_brute_force(grow_policy, interventional):
    """SHAP values of a tiny model (3 trees of depth 3, 4 features) against :func:`brute_force`;
    ``(ens, rows, values)``."""
    kind = "multiclass" if interventional else "regression"
    case = (kind, grow_policy, 3, 6 if grow_policy == "Lossguide" else None, "Max")
    model_json, _, X = trained(*case, iterations=3, n_features=4)
    ens = tree_ensemble_from_json(model_json)
    x = rows(X, 10)
    background = X[200:215] if interventional else None
    expected = brute_force(model_json, x, background)
    method = "interventional" if interventional else "path_dependent"
    got = tree_shap_values(ens, x, method=method, background=background)
    assert_close(np.reshape(got, expected.shape), expected)
    return ens, x, got


@pytest.mark.parametrize("grow_policy, interventional", [
    ("Depthwise", False), pytest.param("Depthwise", True, marks=slow), pytest.param("Lossguide", False, marks=slow),
    ("Lossguide", True)])
def test_brute_force(grow_policy, interventional):
    check_brute_force(grow_policy, interventional)


@pytest.mark.parametrize("case", [pytest.param(GRID[0], marks=slow), pytest.param(GRID[2], marks=slow), GRID[4]])
def test_interaction_values_against_catboost(case):
    model_json, model, X = trained(*case)
    ens = tree_ensemble_from_json(model_json)
    x = rows(X, 20)
    expected = model.get_feature_importance(catboost.Pool(x), type="ShapInteractionValues")
    if expected.ndim == 4:  # [N, K, F+1, F+1]
        expected = expected[:, :, :-1, :-1].transpose(0, 2, 3, 1)
    else:
        expected = expected[:, :-1, :-1]
    got = tree_shap_interaction_values(ens, x)
    assert_close(np.reshape(got, expected.shape), expected)
    phi = tree_shap_values(ens, x)
    assert_close(np.reshape(got, expected.shape).sum(2), np.reshape(phi, expected.shape[:2] + expected.shape[3:]))


# 4b. Deep trees: quadrature instead of per-leaf tables ----------------------------------------


@pytest.fixture
def no_tables(monkeypatch):
    """Force the deep-tree kernels (quadrature, count formula) on shallow trees."""
    import jaximp._shap.tree_plans as tree_shap

    monkeypatch.setattr(tree_shap, "MAX_TABLE_DEPTH", 0)
    monkeypatch.setattr(tree_shap, "MAX_PAIR_DEPTH", 0)
    monkeypatch.setattr(tree_shap, "MAX_INTERVENTIONAL_DEPTH", 0)


DEEP_DEFAULT = {("Depthwise", False, True), ("Lossguide", True, True), ("Lossguide", False, False),
                ("Depthwise", True, False)}  # each grow policy, method and way to read the slots


@pytest.mark.parametrize("grow_policy, interventional, bits", [
    pytest.param(*c, marks=() if c in DEEP_DEFAULT else slow)
    for c in itertools.product(["Depthwise", "Lossguide"], [False, True], [True, False])])
def test_deep_kernels_brute_force(no_tables, monkeypatch, bits, grow_policy, interventional):
    """The deep kernels against brute-force Shapley on tiny trees, with the rows' slot bits read
    from int32 patterns or counted over the path's edges (trees deeper than 30)."""
    import jaximp._shap.tree_plans as tree_shap

    if not bits:
        monkeypatch.setattr(tree_shap, "_BIT_DEPTH", 0)
    ens, x, got = check_brute_force(grow_policy, interventional)
    if not interventional:  # interactions: rows sum to the values, against the tables' interactions
        pairs = np.reshape(tree_shap_interaction_values(ens, x), (len(x), 4, 4, -1))
        assert_close(pairs.sum(2), np.reshape(got, pairs.shape[:2] + pairs.shape[3:]))
        monkeypatch.setattr(tree_shap, "MAX_PAIR_DEPTH", 8)
        assert_close(pairs, np.reshape(tree_shap_interaction_values(ens, x), pairs.shape))


@pytest.mark.parametrize("d", [1, 6, 11])
def test_interventional_tables_against_pairs(d):
    """The interventional tables built by quadrature against their definition: every row pattern
    ``u`` met by every background pattern ``q``; the game is zero unless ``q`` holds the slots
    ``X = ~u`` the row misses, and then ``w+(a, b) = (a-1)! b! / (a+b)!`` and
    ``w-(a, b) = a! (b-1)! / (a+b)!`` with ``a = D - |q|``, ``b = |X|``."""
    from jaximp._shap.games import interventional_table

    rng = np.random.default_rng(d)
    dist = rng.random((2, 1 << d)) * (rng.random((2, 1 << d)) < 0.5)
    dist /= dist.sum(axis=1, keepdims=True)
    got = np.asarray(interventional_table(dist.astype(np.float32), d))  # [2, 2**D, 3] at u

    patterns = np.arange(1 << d)
    size = np.array([bin(p).count("1") for p in patterns])
    fact = np.array([math.factorial(n) for n in range(2 * d + 1)], np.float64)
    x, q = patterns[:, None], patterns[None, :]  # X = ~u, background patterns
    holds = (q & x) == x
    a, b = d - size[None, :], size[:, None]
    plus = np.where(a > 0, fact[np.maximum(a - 1, 0)] * fact[b] / fact[a + b], 0.0)
    minus = np.where(b > 0, fact[a] * fact[np.maximum(b - 1, 0)] / fact[a + b], 0.0)
    shifted = np.where((a > 0) & (b > 0), fact[np.maximum(a - 1, 0)] * fact[np.maximum(b - 1, 0)]
                       / fact[np.maximum(a + b - 1, 0)], 0.0)
    expected = np.stack([(holds * w) @ dist.T for w in (plus, minus, shifted)], axis=-1)  # [2**D (X), 2, 3]
    expected = np.moveaxis(expected, 1, 0)[:, ~patterns & ((1 << d) - 1)]  # at u: X = ~u
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)


@slow  # ~25 s; by default: test_deep_kernels_brute_force, test_deep_oblivious_models_against_catboost
@pytest.mark.parametrize("case", [("regression", "Lossguide", 16, 64, "Min"),
                                  ("multiclass", "Lossguide", 16, 40, "Max")])
def test_deep_trees_against_catboost(case):
    """Lossguide trees of depth up to 16 (CatBoost's limit): path-dependent SHAP and interaction
    values equal CatBoost's, interventional SHAP equals shap's, LossFunctionChange CatBoost's."""
    model_json, model, X = trained(*case, iterations=6, n_features=8)
    ens = tree_ensemble_from_json(model_json)
    assert ens.depth > 12  # deeper than any per-leaf table
    x = rows(X, 30)
    values, expected = catboost_shap(model, x)
    assert_close(np.reshape(tree_shap_values(ens, x), values.shape), values)
    pairs = model.get_feature_importance(catboost.Pool(x[:8]), type="ShapInteractionValues")
    pairs = pairs[:, :, :-1, :-1].transpose(0, 2, 3, 1) if pairs.ndim == 4 else pairs[:, :-1, :-1]
    assert_close(np.reshape(tree_shap_interaction_values(ens, x[:8]), pairs.shape), pairs)
    background = X[100:130]
    explainer = shap.TreeExplainer(shap_tree_dict(model_json), data=background,
                                   feature_perturbation="interventional")
    want = np.asarray(explainer.shap_values(x))
    got = tree_shap_values(ens, x, method="interventional", background=background)
    assert_close(np.reshape(got, want.shape), want)
    if case[0] == "regression":
        import jaximp

        y = model.predict(x) + np.random.default_rng(0).normal(size=len(x))
        lfc = model.get_feature_importance(catboost.Pool(x, y), type="LossFunctionChange")
        assert_close(jaximp.loss_function_change(ens, x, y), lfc, rtol=1e-4)


@pytest.mark.parametrize("kind, categorical", [("regression", False),
                                               pytest.param("binary", True, marks=pytest.mark.slow)])
def test_deep_oblivious_models_against_catboost(kind, categorical):
    """A symmetric model deeper than the oblivious SHAP tables (depth 13; CatBoost allows 16) is
    explained as the equivalent general trees: CatBoost's ShapValues, expected value,
    ShapInteractionValues and LossFunctionChange, categorical columns included."""
    import pandas as pd

    import jaximp
    from jaximp._models.trees import from_oblivious

    X, y = make_data(kind, n=400, n_features=5, nan_fraction=0.05)
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(5)])
    if categorical:
        frame["c"] = np.random.default_rng(0).choice(["a", "b", "c", "d"], size=len(frame))
    model = catboost.CatBoost(dict(loss_function=_LOSS[kind], depth=13, iterations=3, random_seed=0, verbose=0,
                                   thread_count=1, allow_writing_files=False, one_hot_max_size=2))
    model.fit(frame, y, cat_features=["c"] if categorical else None)
    ens = jaximp.from_catboost(model)
    assert isinstance(ens, jaximp.ObliviousEnsemble) and ens.depth == 13
    x = frame.iloc[:12]
    np.testing.assert_array_equal(jaximp.leaf_indices(from_oblivious(ens), x), model.calc_leaf_indexes(x))
    want = model.get_feature_importance(catboost.Pool(x, cat_features=["c"] if categorical else None),
                                        type="ShapValues")
    assert_close(jaximp.shap_values(ens, x), want[:, :-1])
    assert_close(np.reshape(jaximp.expected_value(ens), -1), want[:1, -1])
    pairs = model.get_feature_importance(catboost.Pool(x[:4], cat_features=["c"] if categorical else None),
                                         type="ShapInteractionValues")
    assert_close(jaximp.shap_interaction_values(ens, x[:4]), pairs[:, :-1, :-1])
    target = y[:12] if kind == "regression" else y[:12].astype(float)
    lfc = model.get_feature_importance(catboost.Pool(x, target, cat_features=["c"] if categorical else None),
                                       type="LossFunctionChange")
    assert_close(jaximp.loss_function_change(ens, x, target), lfc, rtol=1e-4)
    with pytest.raises(ValueError, match="method='exact' needs ens.depth <= 12"):
        jaximp.shap_values(ens, x, method="exact")


def test_bad_arguments():
    model_json, _, X = trained(*GRID[0])
    ens = tree_ensemble_from_json(model_json)
    with pytest.raises(ValueError, match="method must be one of"):
        tree_shap_values(ens, X, method="exact-ish")
    with pytest.raises(ValueError, match="background must be given"):
        tree_shap_values(ens, X, method="interventional")
    with pytest.raises(TypeError, match="TreeEnsemble"):
        tree_prediction_values_change(object())


# 5. Through the public API -------------------------------------------------------------------


def test_public_functions_take_a_tree_ensemble(tmp_path):
    """from_catboost of a Depthwise model (object or file) gives a TreeEnsemble that the public
    functions take, with the numbers of the tree_* functions and of CatBoost."""
    import jaximp

    model_json, reloaded, X = trained(*GRID[2])
    path = tmp_path / "model.json"
    path.write_text(json.dumps(model_json))
    ens = jaximp.from_catboost(path)
    assert isinstance(ens, jaximp.TreeEnsemble)
    x = rows(X)
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
                                  tree_shap_values(ens, x, method="interventional", background=background))
    np.testing.assert_array_equal(jaximp.shap_interaction_values(ens, x[:10]),
                                  tree_shap_interaction_values(ens, x[:10]))
