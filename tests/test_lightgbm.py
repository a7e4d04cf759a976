"""LightGBM models as TreeEnsemble (``jaximp.from_lightgbm``).

Oracles, all on real trained models (a few hundred rows, ``num_threads=1``):

* LightGBM itself: ``predict(raw_score=True)``, ``predict(pred_leaf=True)``,
  ``feature_importance("split" / "gain")`` and ``predict(pred_contrib=True)`` (its TreeSHAP, with
  the leaves' data counts as covers); LightGBM loading hand-edited model texts for the decision
  rules around zero (missing types None / Zero / NaN, the zero band ``|x| <= 1e-35f``);
* shap's ``TreeExplainer(model, data=background, feature_perturbation="interventional")``;
* a brute-force Shapley enumeration over the trees of ``Booster.dump_model()`` (LightGBM's JSON,
  read independently of jaximp's text reader), deciding as LightGBM's ``NumericalDecision``;
* a brute-force permutation importance with the same row draws: LightGBM predicts every permuted
  copy, scored in float64 NumPy with the model's loss.

Random forests (``boosting="rf"``): the model predicts the mean of its trees
(``Booster.predict`` divides by the iterations, ``GBDT::Predict``), which jaximp's raw score is;
LightGBM's ``raw_score=True`` and ``pred_contrib=True`` skip that division and are compared
divided by the iterations.

Tolerances: jaximp sums <= 12 float32 trees where LightGBM uses float64, so results agree to
``rtol=1e-5, atol=1e-5 * magnitude``; leaf indices and split counts exactly; gain totals to
``rtol=1e-5`` (LightGBM keeps ``split_gain`` in float32).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import os
import re
import subprocess
import sys

import lightgbm as lgb
import numpy as np
import pytest
import shap
from conftest import make_data

import jaximp
from jaximp._importances.permutation import _row_draws, as_key
from jaximp._importers.lightgbm import tree_ensemble_from_text

RTOL = 1e-5
slow = pytest.mark.slow
ZERO = float(np.float32(1e-35))  # LightGBM's kZeroThreshold
GRID = {  # name: (kind, extra parameters)
    "regression": ("regression", {}),  # NaN in the training rows: missing type NaN
    "regression-none": ("regression", dict(use_missing=False)),  # missing type None: NaN reads 0
    "binary": ("binary", dict(bagging_freq=1, bagging_fraction=0.8)),
    "multiclass": ("multiclass", dict(num_class=3)),
    "rf": ("regression", dict(boosting="rf", bagging_freq=1, bagging_fraction=0.7, feature_fraction=0.8)),
}
_OBJECTIVE = {"regression": "regression", "binary": "binary", "multiclass": "multiclass"}
_LOSS = {"regression": "RMSE", "binary": "Logloss", "multiclass": "MultiClass"}


def params(objective, **extra):
    return {**dict(objective=objective, learning_rate=0.3, num_threads=1, verbose=-1, seed=0,
                   deterministic=True), **extra}


@functools.cache
def trained(name, n_features=6, rounds=12, num_leaves=15):
    """``(Booster, X f32 with NaN, y)``."""
    kind, extra = GRID[name]
    X, y = make_data(kind, n=500, n_features=n_features, nan_fraction=0.05)
    booster = lgb.train(params(_OBJECTIVE[kind], num_leaves=num_leaves, **extra), lgb.Dataset(X, y),
                        num_boost_round=rounds)
    return booster, X, y


def rows(booster, X, n=120, seed=3, edges=True):
    """Rows to explain: training rows, fresh rows with NaN and zeros, and (``edges``) rows at the
    float32 values around some thresholds (the last float32 at or below, the next one above)."""
    rng = np.random.default_rng(seed)
    fresh = rng.normal(size=(n // 3, X.shape[1])).astype(np.float32)
    fresh[rng.random(fresh.shape) < 0.1] = np.nan
    fresh[rng.random(fresh.shape) < 0.05] = 0.0
    at_thresholds = []
    for tree in booster.dump_model()["tree_info"][:4 if edges else 0]:
        node = tree["tree_structure"]
        while "split_index" in node:
            t = np.float64(node["threshold"])
            below = np.float32(t) if np.float32(t) <= t else np.nextafter(np.float32(t), np.float32(-np.inf))
            for value in (below, np.nextafter(below, np.float32(np.inf))):
                row = X[len(at_thresholds)].copy()
                row[node["split_feature"]] = value
                at_thresholds.append(row)
            node = node["left_child"]
    return np.concatenate([X[: n - n // 3], fresh, np.asarray(at_thresholds, np.float32).reshape(-1, X.shape[1])])


def mean_scale(booster):
    """1 / iterations for random forests (their prediction is the mean of the trees), else 1."""
    return 1.0 / booster.current_iteration() if "average_output" in booster.model_to_string() else 1.0


def contributions(booster, x):
    """LightGBM's ``pred_contrib`` as ``(values [N, F, K], expected [K])``, rf means included."""
    out = booster.predict(x, pred_contrib=True) * mean_scale(booster)
    out = out.reshape(len(x), booster.num_model_per_iteration(), -1)  # class by class
    return out[:, :, :-1].transpose(0, 2, 1), out[0, :, -1]


def assert_close(got, expected, rtol=RTOL):
    expected = np.asarray(expected, np.float64)
    magnitude = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(np.asarray(got, np.float64), expected, rtol=rtol, atol=rtol * magnitude)


# 1. Predictions, leaves and split statistics ----------------------------------------------


@pytest.mark.parametrize("name", GRID)
def test_predict_and_leaf_indices(name):
    booster, X, _ = trained(name)
    ens = jaximp.from_lightgbm(booster)
    x = rows(booster, X)
    raw = booster.predict(x, raw_score=True) * mean_scale(booster)
    got = jaximp.predict(ens, x)
    assert got.shape == raw.shape and got.dtype == np.float32
    assert_close(got, raw)
    if name == "rf":
        assert_close(got, booster.predict(x))  # the forest's prediction: the mean
    np.testing.assert_array_equal(jaximp.leaf_indices(ens, x), booster.predict(x, pred_leaf=True))
    assert ens.n_trees == booster.num_trees() and ens.n_features == X.shape[1]
    assert ens.feature_names == tuple(booster.feature_name())
    assert ens.loss_function == _LOSS[GRID[name][0]]


@pytest.mark.parametrize("name", ["multiclass", "rf", pytest.param("regression", marks=slow),
                                  pytest.param("binary", marks=slow), pytest.param("regression-none", marks=slow)])
def test_split_importance(name):
    booster, _, _ = trained(name)
    ens = jaximp.from_lightgbm(booster)
    np.testing.assert_array_equal(jaximp.split_importance(ens, "split"), booster.feature_importance("split"))
    gain = booster.feature_importance("gain")
    np.testing.assert_allclose(jaximp.split_importance(ens, "total_gain"), gain, rtol=RTOL)
    count = booster.feature_importance("split")
    mean = np.divide(gain, count, out=np.zeros_like(gain), where=count > 0)
    np.testing.assert_allclose(jaximp.split_importance(ens, "gain"), mean, rtol=RTOL)


# 2. SHAP ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["regression-none", "multiclass", pytest.param("regression", marks=slow),
                                  pytest.param("binary", marks=slow), pytest.param("rf", marks=slow)])
def test_path_dependent_shap_equals_pred_contrib(name):
    booster, X, _ = trained(name)
    ens = jaximp.from_lightgbm(booster)
    x = rows(booster, X)
    values, expected = contributions(booster, x)
    got = jaximp.shap_values(ens, x)
    assert got.shape == (len(x), X.shape[1]) + ((ens.n_outputs,) if ens.n_outputs > 1 else ())
    assert_close(np.reshape(got, values.shape), values)
    assert_close(np.reshape(jaximp.expected_value(ens), -1), expected)


@slow
@pytest.mark.parametrize("name", ["regression", "binary", "multiclass"])
def test_interventional_against_shap(name):
    """shap sends a NaN to ``default_left`` whatever the missing type, as LightGBM does for
    missing type NaN, which every node of these models has (NaN in every training column); rows
    within a float32 step of a threshold are left out, where shap's traversal (not LightGBM's)
    can go the other way."""
    booster, X, y = trained(name)
    model = booster
    if name == "multiclass":  # shap reads K outputs from the classifier, not from a Booster
        model = lgb.LGBMClassifier(n_estimators=12, num_leaves=15, learning_rate=0.3, n_jobs=1,
                                   verbose=-1, random_state=0, deterministic=True).fit(X, y)
    ens = jaximp.from_lightgbm(model)
    x, background = rows(booster, X, 45, edges=False), X[200:260]
    explainer = shap.TreeExplainer(model, data=background, feature_perturbation="interventional")
    expected = np.asarray(explainer.shap_values(x))
    got = jaximp.shap_values(ens, x, method="interventional", background=background)
    assert_close(np.reshape(got, expected.shape), expected)
    base = jaximp.expected_value(ens, method="interventional", background=background)
    assert_close(np.reshape(base, -1), np.reshape(explainer.expected_value, -1))


def lightgbm_goes_left(node, value):
    """LightGBM's ``NumericalDecision`` on a row passed through its C API, in float64."""
    v = float(value)
    if abs(v) <= ZERO:  # the zero band is dropped from dense rows: it reads 0.0
        v = 0.0
    if math.isnan(v) and node["missing_type"] != "NaN":
        v = 0.0
    if (node["missing_type"] == "Zero" and v == 0.0) or (node["missing_type"] == "NaN" and math.isnan(v)):
        return node["default_left"]
    return v <= node["threshold"]


def brute_force(booster, x, background=None):
    """``[N, F, K]`` Shapley values of every ``dump_model()`` tree by enumerating coalitions of its
    features: the path-dependent game (covers: data counts) or the interventional one."""
    model = booster.dump_model()
    k = model["num_tree_per_iteration"]
    out = np.zeros((len(x), model["max_feature_idx"] + 1, k))

    def cover(n):
        return n["leaf_count"] if "leaf_index" in n else n["internal_count"]

    def child(n, row):
        return n["left_child"] if lightgbm_goes_left(n, row[n["split_feature"]]) else n["right_child"]

    def path_value(n, row, S):
        if "split_index" not in n:
            return n["leaf_value"]
        if n["split_feature"] in S:
            return path_value(child(n, row), row, S)
        left, right = n["left_child"], n["right_child"]
        return (cover(left) * path_value(left, row, S) + cover(right) * path_value(right, row, S)) / cover(n)

    def leaf_value(n, row):
        while "split_index" in n:
            n = child(n, row)
        return n["leaf_value"]

    def features(n):
        if "split_index" not in n:
            return set()
        return {n["split_feature"]} | features(n["left_child"]) | features(n["right_child"])

    for t, tree in enumerate(model["tree_info"]):
        root = tree["tree_structure"]
        players = sorted(features(root))
        m = len(players)
        for i, row in enumerate(x):
            def value(S):
                if background is None:
                    return path_value(root, row, S)
                mixed = np.where(np.isin(np.arange(len(row)), list(S)), row, background)
                return np.mean([leaf_value(root, b) for b in mixed])

            for p in players:
                others = [q for q in players if q != p]
                for r in range(m):
                    w = math.factorial(r) * math.factorial(m - r - 1) / math.factorial(m)
                    for S in itertools.combinations(others, r):
                        out[i, p, t % k] += w * (value(set(S) | {p}) - value(set(S)))
    return out


@pytest.mark.parametrize("name, interventional", [
    ("regression-none", True), pytest.param("regression", False, marks=slow),
    pytest.param("multiclass", False, marks=slow), pytest.param("multiclass", True, marks=slow)])
def test_brute_force(name, interventional):
    """Tiny models (3 iterations of 6 leaves over 4 features) against brute-force Shapley."""
    booster, X, _ = trained(name, n_features=4, rounds=3, num_leaves=6)
    ens = jaximp.from_lightgbm(booster)
    x = rows(booster, X, 12)
    background = X[300:315] if interventional else None
    expected = brute_force(booster, x, background)
    method = "interventional" if interventional else "path_dependent"
    got = jaximp.shap_values(ens, x, method=method, background=background)
    assert_close(np.reshape(got, expected.shape), expected)
    if not interventional:  # and LightGBM's own TreeSHAP agrees with the enumeration
        assert_close(contributions(booster, x)[0], expected)


@functools.cache
def deep_booster():
    """255 leaves, no depth limit: trees deeper than 20, whose paths read up to 13 of 20 features
    (more players than the path-dependent tables take)."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(600, 20)).astype(np.float32)
    y = np.exp(2 * X[:, 0]) + np.sin(4 * X[:, 1]) + X[:, 2] * X[:, 3] + np.sum(np.sin(3 * X[:, 4:]), axis=1)
    X[rng.random(X.shape) < 0.03] = np.nan
    booster = lgb.train(params("regression", num_leaves=255, max_depth=-1, min_data_in_leaf=1,
                               min_sum_hessian_in_leaf=0.0), lgb.Dataset(X, y), num_boost_round=3)
    return booster, X


@slow  # deep trees against pred_contrib by default: test_deep_trees_in_any_buckets_equal_pred_contrib
def test_deep_trees_against_pred_contrib():
    """Trees deeper than 20 (the quadrature kernel on paths of 13 players; ~15 s on 2 cores)."""
    booster, X = deep_booster()
    ens = jaximp.from_lightgbm(booster)
    assert ens.depth >= 20 and ens.n_leaves == 255
    x = rows(booster, X, 90)
    assert_close(jaximp.predict(ens, x), booster.predict(x, raw_score=True))
    np.testing.assert_array_equal(jaximp.leaf_indices(ens, x), booster.predict(x, pred_leaf=True))
    values, expected = contributions(booster, x)
    assert_close(jaximp.shap_values(ens, x), values[:, :, 0])
    assert_close(jaximp.expected_value(ens), expected[0])


def test_path_players_count_the_features_on_each_path():
    """A leaf's slots are the distinct features on its path in LightGBM's own tree dump (paths of
    21 edges read at most 13 features)."""
    from jaximp._shap.paths import path_players

    booster = deep_booster()[0]
    expected = np.zeros((booster.num_trees(), 255), np.int32)

    def walk(tree, node, features):
        if "leaf_index" in node:
            expected[tree, node["leaf_index"]] = len(features)
            return
        for child in ("left_child", "right_child"):
            walk(tree, node[child], features | {node["split_feature"]})

    for t, info in enumerate(booster.dump_model()["tree_info"]):
        walk(t, info["tree_structure"], frozenset())
    ens = jaximp.from_lightgbm(booster)
    ids = np.asarray(ens.leaf_ids)  # jaximp's leaves numbered depth-first; ids: LightGBM's
    np.testing.assert_array_equal(path_players(ens), np.take_along_axis(expected, ids, axis=1))
    assert path_players(ens).max() == 13 and ens.depth > 20


def test_bucket_leaves_hold_every_leaf_once():
    """The buckets of players per path, in chunks of leaves, hold each leaf with a split exactly
    once, whatever the chunk sizes, and their depth covers its players."""
    from jaximp._shap.paths import bucket_leaves, path_players, plan_layout

    ens = jaximp.from_lightgbm(deep_booster()[0])
    lengths = path_players(ens)
    for max_buckets, sizes in [(1, (7,)), (3, (5, 1, 64)), (6, (3, 4, 5, 6, 7, 8))]:
        layout = plan_layout(lengths, ens.n_trees, ens.n_leaves, ens.depth, table_depth=8,
                             table_floats=lambda d: 1 << d, table_bytes=1 << 20, max_buckets=max_buckets)
        assert 1 <= len(layout) <= max_buckets
        chunks = bucket_leaves(lengths, layout, ens.n_trees + 1, ens.n_leaves, sizes[:len(layout)])
        null = (ens.n_trees + 1) * ens.n_leaves
        held = np.concatenate([c.reshape(-1) for c in chunks])
        held = held[held != null]
        np.testing.assert_array_equal(np.sort(held), np.flatnonzero(lengths.reshape(-1) > 0))
        for b, c in zip(layout, chunks):
            inside = lengths.reshape(-1)[c[c != null]]
            assert inside.min() > b.shallowest and inside.max() <= b.depth


@pytest.mark.parametrize("max_buckets", [1, 6])
def test_deep_trees_in_any_buckets_equal_pred_contrib(monkeypatch, max_buckets):
    """Deep trees (quadrature) give LightGBM's values in one bucket of the deepest path for every
    leaf and in the default layout's buckets of their own depths."""
    import jaximp._shap.tree_plans as tree_shap

    booster, X = deep_booster()
    layout = functools.partial(tree_shap.plan_layout, max_buckets=max_buckets)
    monkeypatch.setattr(tree_shap, "plan_layout", layout)
    ens = jaximp.from_lightgbm(booster)
    layout = tree_shap._layout(ens, "path")[0]
    assert len(layout) == max_buckets and not layout[-1].tables  # the deepest by quadrature
    x = rows(booster, X, 30)
    assert_close(jaximp.shap_values(ens, x), contributions(booster, x)[0][:, :, 0])


# 3. Permutation importance ------------------------------------------------------------------


def lightgbm_loss(loss, y, raw, w):
    """The model's loss of LightGBM's raw predictions in float64 (CatBoost's definitions)."""
    if loss == "RMSE":
        return np.sqrt(np.sum(w * (raw - y) ** 2) / np.sum(w))
    if loss == "Logloss":
        return np.sum(w * (np.logaddexp(0.0, raw) - y * raw)) / np.sum(w)
    log_p = raw - np.logaddexp.reduce(raw, axis=1, keepdims=True)
    return -np.sum(w * log_p[np.arange(len(y)), y.astype(int)]) / np.sum(w)


@pytest.mark.parametrize("name, weighted, max_samples", [
    ("regression", False, 1.0), pytest.param("binary", True, 1.0, marks=slow),
    pytest.param("multiclass", True, 0.6, marks=slow)])
def test_permutation_matches_brute_force_with_the_same_draws(name, weighted, max_samples):
    booster, X, y = trained(name)
    ens = jaximp.from_lightgbm(booster)
    w = np.random.default_rng(1).uniform(0.2, 3.0, size=len(X)) if weighted else None
    groups = [[f] for f in range(X.shape[1])] + [[0, 2]]
    got = jaximp.permutation_importance(ens, X, y, n_repeats=3, random_state=7, sample_weight=w,
                                        max_samples=max_samples, feature_groups=groups)
    weight = np.ones(len(X)) if w is None else w
    want = np.zeros((len(groups), 3))
    for r, (chosen, source) in enumerate(_row_draws(as_key(7, "test"), 3, len(X), int(max_samples * len(X)))):
        def loss(rows_x):
            raw = booster.predict(rows_x, raw_score=True)
            return lightgbm_loss(ens.loss_function, y[chosen], raw, weight[chosen])

        base = loss(X[chosen])
        for g, cols in enumerate(groups):
            permuted = X[chosen].copy()
            permuted[:, cols] = X[source][:, cols]
            want[g, r] = loss(permuted) - base
    np.testing.assert_allclose(got.importances, want, rtol=RTOL, atol=RTOL)


# 4. Model files, estimators, objectives ------------------------------------------------------


def test_model_file_equals_booster(tmp_path):
    booster, X, _ = trained("multiclass")
    path = tmp_path / "model.txt"
    booster.save_model(str(path))
    from_file, from_booster = jaximp.from_lightgbm(path), jaximp.from_lightgbm(booster)
    for field in ("roots", "node_features", "node_borders", "node_nan_right", "node_children", "leaf_values",
                  "leaf_weights", "node_gains", "node_weights", "leaf_ids"):
        np.testing.assert_array_equal(getattr(from_file, field), getattr(from_booster, field), err_msg=field)
    x = rows(booster, X, 60)
    assert_close(jaximp.predict(jaximp.from_lightgbm(str(path)), x), booster.predict(x, raw_score=True))
    values, _ = contributions(lgb.Booster(model_file=str(path)), x)
    assert_close(jaximp.shap_values(from_file, x), values)


@slow
def test_model_file_imports_without_lightgbm(tmp_path):
    """A child process where ``import lightgbm`` fails reads the file and predicts as LightGBM."""
    booster, X, _ = trained("regression")
    booster.save_model(str(tmp_path / "model.txt"))
    x = rows(booster, X, 30)
    np.save(tmp_path / "x.npy", x)
    model, rows_in, out = (str(tmp_path / name) for name in ("model.txt", "x.npy", "p.npy"))
    script = (
        "import sys; sys.modules['lightgbm'] = None\n"  # any import of lightgbm now fails
        "import numpy as np, jaximp\n"
        f"ens = jaximp.from_lightgbm({model!r})\n"
        f"np.save({out!r}, np.asarray(jaximp.predict(ens, np.load({rows_in!r}))))\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=str(tmp_path.parent),
                   env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert_close(np.load(tmp_path / "p.npy"), booster.predict(x, raw_score=True))


def test_estimators():
    X, y = make_data("binary", n=400)
    labels = np.asarray(["no", "yes"])[y]
    clf = lgb.LGBMClassifier(n_estimators=8, num_leaves=7, n_jobs=1, verbose=-1, random_state=0).fit(X, labels)
    ens = jaximp.from_lightgbm(clf)
    assert ens.class_names == ("no", "yes") and ens.loss_function == "Logloss"
    assert_close(jaximp.predict(ens, X), clf.predict(X, raw_score=True))
    got = jaximp.permutation_importance(ens, X, labels, n_repeats=2, random_state=0)  # labels by name
    unnamed = dataclasses.replace(ens, class_names=())  # the same model reading 0 / 1
    again = jaximp.permutation_importance(unnamed, X, y, n_repeats=2, random_state=0)
    np.testing.assert_array_equal(got.importances, again.importances)
    reg = lgb.LGBMRegressor(n_estimators=5, num_leaves=7, n_jobs=1, verbose=-1).fit(X, X[:, 0])
    assert jaximp.from_lightgbm(reg).class_names == () and jaximp.from_lightgbm(reg).loss_function == "RMSE"
    ranker = lgb.LGBMRanker(n_estimators=3, num_leaves=5, n_jobs=1, verbose=-1).fit(X, y, group=[100] * 4)
    ens = jaximp.from_lightgbm(ranker)
    assert ens.loss_function == ""
    assert_close(jaximp.predict(ens, X), ranker.predict(X, raw_score=True))
    with pytest.raises(ValueError, match="must be fitted"):
        jaximp.from_lightgbm(lgb.LGBMRegressor())


@pytest.mark.parametrize("objective, extra, loss", [
    ("regression_l1", {}, "MAE"), ("huber", {}, ""), ("cross_entropy", {}, "CrossEntropy"),
    ("multiclassova", dict(num_class=3), "MultiClassOneVsAll"), ("binary", dict(sigmoid=2.0), ""),
    ("regression", dict(reg_sqrt=True), ""), ("poisson", {}, ""),
])
def test_loss_function_names(objective, extra, loss):
    """CatBoost's loss name where it scores LightGBM's raw score the same way, else ""."""
    X, y = make_data("multiclass", n=200)
    target = {"cross_entropy": y / 2.0, "binary": (y > 0) * 1, "poisson": y * 1.0}.get(objective, y)
    booster = lgb.train(params(objective, num_leaves=4, **extra), lgb.Dataset(X, target), num_boost_round=2)
    assert jaximp.from_lightgbm(booster).loss_function == loss


@slow
def test_single_leaf_trees_and_best_iteration():
    """Trees that cannot split (one leaf, no nodes) and a Booster that stopped early: the import
    reads the best iteration, as ``predict`` does."""
    X, y = make_data("regression", n=300)
    stump = lgb.train(params("regression", min_data_in_leaf=400), lgb.Dataset(X, y), num_boost_round=2)
    ens = jaximp.from_lightgbm(stump)
    assert ens.n_trees == 1 and int(ens.roots[0]) == -1
    assert_close(jaximp.predict(ens, X), stump.predict(X, raw_score=True))
    values, expected = contributions(stump, X[:5])
    assert_close(jaximp.shap_values(ens, X[:5]), values[:, :, 0])
    assert_close(jaximp.expected_value(ens), expected[0])
    early = lgb.train(params("regression", num_leaves=7, learning_rate=0.5), lgb.Dataset(X[:200], y[:200]),
                      num_boost_round=60, valid_sets=[lgb.Dataset(X[200:], y[200:])],
                      callbacks=[lgb.early_stopping(3, verbose=False)])
    assert 0 < early.best_iteration < 60
    ens = jaximp.from_lightgbm(early)
    assert ens.n_trees == early.best_iteration
    assert_close(jaximp.predict(ens, X), early.predict(X, raw_score=True))


# 5. Decision rules around zero: LightGBM on edited model texts ------------------------------


F32 = np.float32
SPECIALS = np.asarray([0.0, -0.0, ZERO, -ZERO, np.nextafter(F32(ZERO), F32(1)), np.nextafter(F32(-ZERO), F32(-1)),
                       1e-36, -1e-36, 1e-30, -1e-30, 1e-45, -1e-45, 0.3, -0.3, 0.5, -0.5, np.nan], np.float32)
THRESHOLDS = [0.0, ZERO, -ZERO, 1e-36, -1e-36, 1e-35, -1e-35, 0.3, -0.3, 0.1234567891234,
              float(np.nextafter(F32(-ZERO), F32(-1))), float(np.nextafter(F32(ZERO), F32(1)))]


@functools.cache
def stump_text():
    X = np.random.default_rng(0).normal(size=(300, 2)).astype(np.float32)
    booster = lgb.train(params("regression", num_leaves=2, min_data_in_leaf=5), lgb.Dataset(X, X[:, 0]),
                        num_boost_round=1)
    return booster.model_to_string()


def edited(threshold, decision_type):
    """The one-split model with its threshold and decision type replaced."""
    text = stump_text()
    text = re.sub(r"\nthreshold=\S+", f"\nthreshold={threshold!r}", text, count=1)
    return re.sub(r"\ndecision_type=\S+", f"\ndecision_type={decision_type}", text, count=1)


@pytest.mark.parametrize("decision_type", [0, 2, 4, 6, 8, 10])  # None, Zero, NaN x default right / left
def test_decision_rules_around_zero(decision_type):
    """Every threshold near zero, every missing type and default direction, on the values next
    to zero, in the zero band and NaN: jaximp's leaves are LightGBM's, or the split is refused
    exactly where LightGBM's sides alternate (left, right, zero band, right or the reverse)."""
    x = np.stack([SPECIALS, np.zeros_like(SPECIALS)], axis=1)
    order = np.argsort(np.nan_to_num(SPECIALS, nan=np.inf), kind="stable")[:-1]  # by value, NaN out
    for threshold in THRESHOLDS:
        text = edited(threshold, decision_type)
        leaves = lgb.Booster(model_str=text).predict(x, pred_leaf=True)[:, 0]
        sides = leaves[order]
        alternating = np.count_nonzero(np.diff(sides)) > 1
        if alternating:
            with pytest.raises(ValueError, match="zero_as_missing"):
                tree_ensemble_from_text(text)
            continue
        ens = tree_ensemble_from_text(text)
        np.testing.assert_array_equal(jaximp.leaf_indices(ens, x)[:, 0], leaves, err_msg=repr(threshold))


# 6. What jaximp refuses -----------------------------------------------------------------------


def test_refuses_what_it_does_not_support(tmp_path):
    X, y = make_data("regression", n=300)
    linear = lgb.train(params("regression", num_leaves=4, linear_tree=True), lgb.Dataset(X, y), num_boost_round=2)
    with pytest.raises(ValueError, match="linear tree"):
        jaximp.from_lightgbm(linear)
    Xz = X.copy()
    Xz[np.random.default_rng(1).random(Xz.shape) < 0.2] = 0.0
    zero = lgb.train(params("regression", num_leaves=15, zero_as_missing=True), lgb.Dataset(Xz, y),
                     num_boost_round=10)
    with pytest.raises(ValueError, match="zero_as_missing=False"):
        jaximp.from_lightgbm(zero)


def test_refuses_bad_models(tmp_path):
    booster, _, _ = trained("regression", rounds=2)
    text = booster.model_to_string()
    with pytest.raises(TypeError, match="from_lightgbm: model must be a lightgbm.Booster"):
        jaximp.from_lightgbm(object())
    with pytest.raises(ValueError, match="existing model file"):
        jaximp.from_lightgbm(tmp_path / "missing.txt")
    cases = {
        "must be a LightGBM model text": '{"format": "json"}',
        "cut short": text[: len(text) // 3],
        "has no 'leaf_value' line": re.sub(r"\nleaf_value=.*", "", text, count=1),
        "'threshold' has": re.sub(r"\nthreshold=(\S+) ", r"\nthreshold=", text, count=1),
        "do not form one binary tree": re.sub(r"\nleft_child=(\S+)", r"\nleft_child=0", text, count=1),
        "header has no 'max_feature_idx'": re.sub(r"\nmax_feature_idx=.*", "", text, count=1),
    }
    for message, content in cases.items():
        path = tmp_path / "bad.txt"
        path.write_text(content)
        with pytest.raises(ValueError, match=re.escape(message)):
            jaximp.from_lightgbm(path)
